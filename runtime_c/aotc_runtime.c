/*
 * aotc_runtime.c: a small pthread pool for the parallel loops of compiled models.
 *
 * One global pool, guarded by one mutex.  A loop is published as a "job" with a
 * generation number; workers sleep until the generation changes, then take pieces of
 * the range until none are left.  The caller takes pieces too, so a job always finishes
 * even if no worker wakes in time.  Only one job runs at a time: a loop started while
 * another is running (nested, or from a second application thread) runs inline instead
 * of waiting, which can never deadlock.
 *
 * Each thread owns a contiguous share of the range and takes it from the front, a
 * piece at a time; a thread whose share is done takes pieces from the back of the
 * largest share left.  So with threads of equal speed each one runs exactly its share
 * (a GEMM part keeps its rows or columns, and their cache lines, on one core from one
 * K slice to the next), and a thread slowed down (a busy neighbour on a shared
 * machine, a late wake-up) does not make the others wait for it: on a 2-vCPU VM the
 * caller of static halves spent 6-14% of ResNet-50's run waiting.
 *
 * Waiting spins for a short while before it sleeps: a model runs its parallel loops
 * back to back, and waking a sleeping thread costs tens to hundreds of microseconds
 * (more on virtual machines, whose idle CPUs halt), which on a 1 ms model ate all
 * of a second thread's gain.  `generation` and `remaining` are written under the
 * mutex and read atomically by the spinners.  A spinner yields its CPU between rounds:
 * a worker just woken may have been put on the caller's CPU, and the caller spinning
 * for that worker's piece kept it off until the time slice ended (MobileNet-V3-small
 * at 2 threads on a 2-vCPU VM, called every 10 ms: 2.8-3.2 ms median, 2.1 yielding;
 * 1.5-1.7 -> 1.3 ms right after a warm run; back-to-back runs unchanged, 1.2 ms).
 */
#define _POSIX_C_SOURCE 200809L

#include "aotc_runtime.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define AOTC_MAX_THREADS 256
/* A share is taken in about this many pieces: fewer pieces per share leave more
 * imbalance when one thread is slow; more cost a lock round trip each. */
#define AOTC_PIECES_PER_SHARE 8
/* How long a worker looks for the next job, and the caller for the end of its job,
 * before sleeping: longer than the gaps between a model's loops, short enough that an
 * idle model gives its cores back within a millisecond. */
#define AOTC_SPIN_NS 500000

typedef struct aotc_worker {
    pthread_t thread;
    int index; /* its slot, and its share of a job: 1, 2, ... (the caller's is 0) */
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
    int shares; /* threads taking part: share i is [next[i], end[i]) */
    int64_t piece; /* iterations taken at a time */
    int64_t next[AOTC_MAX_THREADS];
    int64_t end[AOTC_MAX_THREADS];
    int64_t remaining; /* iterations not yet finished */
} pool = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 0, {0},
    0, 0, 0, 0, 0, 0, {0}, {0}, 0,
};

/* Set once the count has been chosen (by a model's first run or by the application). */
static int configured;

/* Chunk i of k over [0, n): sizes differ by at most one, no overflow for any n. */
static int64_t chunk_begin(int64_t n, int64_t k, int64_t i) {
    int64_t rest = n % k;
    return i * (n / k) + (i < rest ? i : rest);
}

/* The next piece for thread `self` (< shares): from the front of its own share, else
 * from the back of the largest share left.  0 when nothing is left.  Mutex held. */
static int take_piece_locked(int self, int64_t *begin, int64_t *end) {
    int victim = -1;
    int64_t most = 0;
    if (pool.next[self] < pool.end[self]) {
        *begin = pool.next[self];
        *end = pool.end[self] - *begin > pool.piece ? *begin + pool.piece : pool.end[self];
        pool.next[self] = *end;
        return 1;
    }
    for (int i = 0; i < pool.shares; i++) {
        if (pool.end[i] - pool.next[i] > most) {
            most = pool.end[i] - pool.next[i];
            victim = i;
        }
    }
    if (victim < 0) return 0;
    *end = pool.end[victim];
    *begin = most > pool.piece ? *end - pool.piece : pool.next[victim];
    pool.end[victim] = *begin;
    return 1;
}

/* Takes and runs pieces of the current job until none are left.  Called and returns
 * with the mutex held; releases it while running a piece. */
static void run_pieces_locked(int self) {
    int64_t begin, end;
    while (take_piece_locked(self, &begin, &end)) {
        aotc_loop_fn fn = pool.fn;
        void *ctx = pool.ctx;
        pthread_mutex_unlock(&pool.mutex);
        fn(ctx, begin, end, self);
        pthread_mutex_lock(&pool.mutex);
        if (__atomic_sub_fetch(&pool.remaining, end - begin, __ATOMIC_RELEASE) == 0)
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
        sched_yield();
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
        /* a job of fewer iterations than threads has fewer slots: the rest sit it out */
        if (self->index < pool.shares) run_pieces_locked(self->index);
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
        w->index = pool.num_workers + 1;
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
        fn(ctx, 0, n, 0);
        return;
    }
    start_workers_locked(threads - 1);
    pool.busy = 1;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.shares = pool.num_workers + 1 < n ? pool.num_workers + 1 : (int)n;
    for (int i = 0; i < pool.shares; i++) {
        pool.next[i] = chunk_begin(n, pool.shares, i);
        pool.end[i] = chunk_begin(n, pool.shares, i + 1);
    }
    pool.piece = (n / pool.shares + AOTC_PIECES_PER_SHARE - 1) / AOTC_PIECES_PER_SHARE;
    __atomic_store_n(&pool.remaining, n, __ATOMIC_RELAXED);
    __atomic_store_n(&pool.generation, pool.generation + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool.work);
    run_pieces_locked(0);
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

/* Stops the workers past the first `keep` and joins them. */
static void stop_workers_beyond(int keep) {
    aotc_worker *surplus[AOTC_MAX_THREADS];
    int count = 0;
    pthread_mutex_lock(&pool.mutex);
    while (pool.num_workers > keep) {
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

void aotc_set_num_threads(int n) {
    if (n <= 0) n = online_cpus();
    if (n > AOTC_MAX_THREADS) n = AOTC_MAX_THREADS;
    pthread_mutex_lock(&pool.mutex);
    pool.num_threads = n;
    __atomic_store_n(&configured, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&pool.mutex);
    stop_workers_beyond(n - 1);
}

/* A library unloaded (dlclose: a shared object of the model dropped by its host, as
 * Python drops cffi's at exit) with workers alive would unmap the code they spin in:
 * they stop and are joined first.  At a plain exit this joins idle workers. */
__attribute__((destructor)) static void stop_all_workers(void) {
    stop_workers_beyond(0);
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
