/*
 * aotc_runtime.c: a small pthread pool for the parallel loops of compiled models.
 *
 * One global pool, guarded by one mutex.  A loop is published as a "job" with a
 * generation number; workers sleep until the generation changes, then claim chunks
 * until none are left.  The caller claims chunks too, so a job always finishes even if
 * no worker wakes in time.  Only one job runs at a time: a loop started while another
 * is running (nested, or from a second application thread) runs inline instead of
 * waiting, which can never deadlock.
 *
 * Waiting spins for a short while before it sleeps: a model runs its parallel loops
 * back to back, and waking a sleeping thread costs tens to hundreds of microseconds
 * (more on virtual machines, whose idle CPUs halt), which on a 1 ms model ate all
 * of a second thread's gain.  `generation` and `remaining` are written under the
 * mutex and read atomically by the spinners.
 */
#define _POSIX_C_SOURCE 200809L

#include "aotc_runtime.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define AOTC_MAX_THREADS 256
/* How long a worker looks for the next job, and the caller for the end of its job,
 * before sleeping: longer than the gaps between a model's loops, short enough that an
 * idle model gives its cores back within a millisecond. */
#define AOTC_SPIN_NS 500000

typedef struct aotc_worker {
    pthread_t thread;
    int stop; /* set (under the pool mutex) to make this worker exit */
    uint64_t seen; /* the last job generation this worker looked at */
} aotc_worker;

static struct {
    pthread_mutex_t mutex;
    pthread_cond_t work; /* a new job was published, or a worker must stop */
    pthread_cond_t done; /* the last chunk of the current job finished */
    int num_threads; /* requested, the caller included */
    int num_workers; /* started and not stopped */
    aotc_worker *workers[AOTC_MAX_THREADS];
    int busy; /* a job is running */
    uint64_t generation;
    aotc_loop_fn fn;
    void *ctx;
    int64_t n;
    int64_t chunks;
    int64_t next_chunk;
    int64_t remaining; /* chunks not yet finished */
} pool = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 0, {0},
    0, 0, 0, 0, 0, 0, 0, 0,
};

/* Set once the count has been chosen (by a model's first run or by the application). */
static int configured;

/* Chunk i of k over [0, n): sizes differ by at most one, no overflow for any n. */
static int64_t chunk_begin(int64_t n, int64_t k, int64_t i) {
    int64_t rest = n % k;
    return i * (n / k) + (i < rest ? i : rest);
}

/* Claims and runs chunks of the current job until none are left.  Called and returns
 * with the mutex held; releases it while running a chunk. */
static void run_chunks_locked(void) {
    while (pool.next_chunk < pool.chunks) {
        int64_t i = pool.next_chunk++;
        aotc_loop_fn fn = pool.fn;
        void *ctx = pool.ctx;
        int64_t begin = chunk_begin(pool.n, pool.chunks, i);
        int64_t end = chunk_begin(pool.n, pool.chunks, i + 1);
        pthread_mutex_unlock(&pool.mutex);
        fn(ctx, begin, end);
        pthread_mutex_lock(&pool.mutex);
        if (__atomic_sub_fetch(&pool.remaining, 1, __ATOMIC_RELEASE) == 0)
            pthread_cond_signal(&pool.done);
    }
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Spins (the mutex not held) until `ready(arg)` or AOTC_SPIN_NS pass; whether it is. */
static int spin_until(int (*ready)(const void *), const void *arg) {
    int64_t deadline = now_ns() + AOTC_SPIN_NS;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            if (ready(arg)) return 1;
            cpu_relax();
        }
        if (now_ns() > deadline) return 0;
    }
}

/* A worker's wake-up condition: a job it has not looked at, or a request to stop. */
static int job_published(const void *worker) {
    const aotc_worker *self = (const aotc_worker *)worker;
    return __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE) != self->seen ||
           __atomic_load_n(&self->stop, __ATOMIC_RELAXED);
}

static int job_finished(const void *unused) {
    (void)unused;
    return __atomic_load_n(&pool.remaining, __ATOMIC_ACQUIRE) == 0;
}

static void *worker_main(void *arg) {
    aotc_worker *self = (aotc_worker *)arg;
    pthread_mutex_lock(&pool.mutex);
    for (;;) {
        if (!self->stop && self->seen == pool.generation) {
            pthread_mutex_unlock(&pool.mutex);
            spin_until(job_published, self);
            pthread_mutex_lock(&pool.mutex);
        }
        while (!self->stop && self->seen == pool.generation)
            pthread_cond_wait(&pool.work, &pool.mutex);
        if (self->stop) break;
        self->seen = pool.generation;
        run_chunks_locked();
    }
    pthread_mutex_unlock(&pool.mutex);
    return NULL;
}

/* Starts workers until there are `wanted`; stops early if the system refuses threads. */
static void start_workers_locked(int wanted) {
    while (pool.num_workers < wanted) {
        aotc_worker *w = (aotc_worker *)calloc(1, sizeof *w);
        if (!w) return;
        w->seen = pool.generation;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            free(w);
            return;
        }
        pool.workers[pool.num_workers++] = w;
    }
}

void aotc_parallel_for(int64_t n, aotc_loop_fn fn, void *ctx) {
    int threads;
    if (n <= 0) return;
    pthread_mutex_lock(&pool.mutex);
    threads = pool.num_threads;
    if (threads <= 1 || n == 1 || pool.busy) {
        pthread_mutex_unlock(&pool.mutex);
        fn(ctx, 0, n);
        return;
    }
    start_workers_locked(threads - 1);
    pool.busy = 1;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.n = n;
    pool.chunks = pool.num_workers + 1 < n ? pool.num_workers + 1 : n;
    pool.next_chunk = 0;
    __atomic_store_n(&pool.remaining, pool.chunks, __ATOMIC_RELAXED);
    __atomic_store_n(&pool.generation, pool.generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool.work);
    run_chunks_locked();
    if (pool.remaining > 0) {
        pthread_mutex_unlock(&pool.mutex);
        spin_until(job_finished, NULL);
        pthread_mutex_lock(&pool.mutex);
    }
    while (pool.remaining > 0) pthread_cond_wait(&pool.done, &pool.mutex);
    pool.busy = 0;
    pthread_mutex_unlock(&pool.mutex);
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void aotc_set_num_threads(int n) {
    aotc_worker *surplus[AOTC_MAX_THREADS];
    int count = 0;
    if (n <= 0) n = online_cpus();
    if (n > AOTC_MAX_THREADS) n = AOTC_MAX_THREADS;
    pthread_mutex_lock(&pool.mutex);
    pool.num_threads = n;
    __atomic_store_n(&configured, 1, __ATOMIC_RELEASE);
    while (pool.num_workers > n - 1) {
        aotc_worker *w = pool.workers[--pool.num_workers];
        __atomic_store_n(&w->stop, 1, __ATOMIC_RELAXED);
        surplus[count++] = w;
    }
    if (count) pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.mutex);
    /* Joined outside the lock: a stopping worker may still be finishing a chunk, which
     * needs the mutex to report completion. */
    while (count > 0) {
        aotc_worker *w = surplus[--count];
        pthread_join(w->thread, NULL);
        free(w);
    }
}

void aotc_configure_threads(int default_threads) {
    const char *env;
    long requested;
    char *end;
    if (__atomic_load_n(&configured, __ATOMIC_ACQUIRE)) return;
    env = getenv("AOTC_NUM_THREADS");
    requested = env ? strtol(env, &end, 10) : 0;
    if (!env || *end != '\0' || requested <= 0 || requested > AOTC_MAX_THREADS)
        requested = default_threads;
    pthread_mutex_lock(&pool.mutex);
    if (!configured) {
        pool.num_threads = requested > 0 ? (int)requested : online_cpus();
        __atomic_store_n(&configured, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pool.mutex);
}

int aotc_get_num_threads(void) {
    int n;
    pthread_mutex_lock(&pool.mutex);
    n = pool.num_threads;
    pthread_mutex_unlock(&pool.mutex);
    return n;
}
