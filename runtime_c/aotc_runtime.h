/*
 * aotc_runtime.h: the runtime that compiled models link against (libc + pthreads only).
 *
 * Every libNAME.a carries a copy of these objects; a program that links several models
 * gets one copy (the archive member is pulled once), so the thread pool is shared by all
 * models in the process.
 */
#ifndef AOTC_RUNTIME_H_
#define AOTC_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A body of a parallel loop: runs iterations [begin, end) with the caller's context.
 * `slot` tells the threads of one loop apart: 0 <= slot < min(threads, n), and no two
 * pieces of a loop run at once with the same slot, so a body may keep scratch per slot
 * (a thread then reuses its own, still in its cache, from piece to piece). */
typedef void (*aotc_loop_fn)(void *ctx, int64_t begin, int64_t end, int64_t slot);

/*
 * Runs fn over [0, n) and returns when all of it is done.  Each thread owns a
 * contiguous share (about n / threads) and runs it in pieces from the front; a thread
 * that is done takes pieces from the back of the largest share left.  So fn sees
 * pieces [begin, end), several per thread, in no fixed order across threads.  The
 * calling thread takes part, as slot 0.  With one thread (the default), or when the
 * pool is already busy (a nested call, or another thread's loop), it calls
 * fn(ctx, 0, n, 0) inline.
 */
void aotc_parallel_for(int64_t n, aotc_loop_fn fn, void *ctx);

/*
 * Sets how many threads parallel loops use (the caller included).  n <= 0 means the
 * number of online CPUs.  Workers start lazily on the next parallel loop; lowering the
 * count stops and joins the surplus workers before returning, so a shared object can be
 * unloaded after aotc_set_num_threads(1).
 */
void aotc_set_num_threads(int n);

/* The number of threads parallel loops use (1 unless set). */
int aotc_get_num_threads(void);

/*
 * Called by every model run with the thread count the model was compiled for: the first
 * call sets the count from $AOTC_NUM_THREADS if that is a positive number, else from
 * `default_threads` (<= 0: the number of online CPUs); later calls, and any call after aotc_set_num_threads, do nothing.
 */
void aotc_configure_threads(int default_threads);

/*
 * External weights (aotc compile --weights external): NAME_set_weights and
 * NAME_load_weights of each model call these with the pointer their kernels read and
 * the size and checksum NAME.h states.
 *
 * The checksum of `size` bytes: sum = size, then for each 8-byte little-endian word
 * w[i] (the last one zero-padded) sum += mix(w[i] ^ i), with mix(x) = y ^ (y >> 32)
 * for y = x * 0x9E3779B97F4A7C15, all modulo 2^64.  Every changed word changes the sum
 * (mix is a bijection); it runs at memory speed, unlike a byte-serial hash.
 */
uint64_t aotc_weights_checksum(const void *weights, size_t size);

/*
 * Points *base at `weights` if they are `expected_size` bytes aligned to 64 whose
 * checksum is `expected_checksum`; else sets *base to NULL (the model's runs then
 * refuse).  Returns 0, 1 for another size, 2 for a pointer not aligned to 64, 3 for
 * another checksum.  The bytes must stay valid and unchanged while the model runs.
 */
int aotc_set_weights(const void **base, const void *weights, size_t size,
                     size_t expected_size, uint64_t expected_checksum);

/*
 * Maps the file at `path` read-only (shared: processes mapping one file share its
 * pages) and checks it as aotc_set_weights does; returns its status, or 4 if the file
 * cannot be opened or mapped.  The mapping lasts until the process ends (a refused
 * file is unmapped).
 */
int aotc_load_weights(const void **base, const char *path, size_t expected_size,
                      uint64_t expected_checksum);

#ifdef __cplusplus
}
#endif

#endif /* AOTC_RUNTIME_H_ */
