/*
 * aotc_runtime.c: a small pthread pool for the parallel loops of compiled models, and
 * (at the end) the checks of external weights.
 *
 * One global pool.  A loop is published as a "job" with a generation number; workers
 * wait until the generation changes, then take pieces of the range until none are
 * left.  The caller takes pieces too, so a job always finishes even if no worker wakes
 * in time.  Only one job runs at a time: a loop started while another is running
 * (nested, or from a second application thread) runs inline instead of waiting, which
 * can never deadlock.
 *
 * Each thread owns a contiguous share of the range and takes it from the front, a
 * piece at a time; a thread whose share is done takes pieces from the back of the
 * largest share left.  So with threads of equal speed each one runs exactly its share
 * (a GEMM part keeps its rows or columns, and their cache lines, on one core from one
 * K slice to the next), and a thread slowed down (a busy neighbour on a shared
 * machine, a late wake-up) does not make the others wait for it: on a 2-vCPU VM the
 * caller of static halves spent 6-14% of ResNet-50's run waiting.
 *
 * Pieces are taken without a lock: a share is one atomic word (next and end piece,
 * on its own cache line), which its owner advances and a thief shortens by
 * compare-and-swap, and each thread reports the iterations it ran once, when it finds
 * nothing left.  A mutex round trip per piece cost a 15 us loop at 2 threads about
 * 1.5 us.  A job's description (function, context, shares) is only rewritten while no
 * worker is inside the job: `state` holds the generation, the number of workers that
 * joined it, and a bit that closes it to joiners while the caller writes the next.
 *
 * Waiting spins for a short while before it sleeps: a model runs its parallel loops
 * back to back, and waking a sleeping thread costs tens to hundreds of microseconds
 * (more on virtual machines, whose idle CPUs halt), which on a 1 ms model ate all
 * of a second thread's gain.  A spinner yields its CPU between rounds: a worker just
 * woken may have been put on the caller's CPU, and the caller spinning for that
 * worker's piece kept it off until the time slice ended (MobileNet-V3-small at 2
 * threads on a 2-vCPU VM, called every 10 ms: 2.8-3.2 ms median, 2.1 yielding).
 * Sleepers announce themselves in a counter before they check for work, and
 * publishers check it after publishing (both sequentially consistent), so one of the
 * two always sees the other and no wake-up is lost.
 */
#define _POSIX_C_SOURCE 200809L

#include "aotc_runtime.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The pool's capacity, the caller included; every thread count is clamped to it
 * (aotc.artifacts.runtime.MAX_THREADS, which the compiler refuses to exceed). */
#define AOTC_MAX_THREADS 512
/* A share is taken in about this many pieces: fewer pieces per share leave more
 * imbalance when one thread is slow. */
#define AOTC_PIECES_PER_SHARE 8
/* How long a worker looks for the next job, and the caller for the end of its job,
 * before sleeping: longer than the gaps between a model's loops, short enough that an
 * idle model gives its cores back within a millisecond. */
#define AOTC_SPIN_NS 500000

/* `state`: bits 0-8 count the workers inside the job, bit 9 closes it while the next is
 * written, the bits above are the generation. */
#define JOINED_MASK UINT64_C(0x1ff)
#define CLOSED UINT64_C(0x200)
#define GENERATION_SHIFT 10
/* the job state's count of workers inside holds every worker the pool can have */
typedef char aotc_state_counts_every_worker[AOTC_MAX_THREADS - 1 <= 0x1ff ? 1 : -1];

typedef struct aotc_worker {
    pthread_t thread;
    int index; /* its slot, and its share of a job: 1, 2, ... (the caller's is 0) */
    int stop; /* set to make this worker exit */
    uint64_t seen; /* the last job generation this worker looked at */
} aotc_worker;

/* One thread's share: pieces [next, end) of `first`..`last`, packed as next << 32 | end. */
typedef struct {
    uint64_t pieces;
    int64_t first, last; /* its iterations [first, last) */
} __attribute__((aligned(64))) aotc_share;

static struct {
    pthread_mutex_t mutex; /* guards the worker list, the sleeps and wake-ups */
    pthread_cond_t work; /* a new job was published, or a worker must stop */
    pthread_cond_t done; /* the current job finished */
    int num_threads; /* requested, the caller included */
    int num_workers; /* started and not stopped */
    aotc_worker *workers[AOTC_MAX_THREADS];
    int busy; /* a job is running (exchanged atomically) */
    int sleepers; /* workers asleep, or about to be, on `work` */
    int caller_sleeping; /* the caller is asleep, or about to be, on `done` */
    uint64_t state;
    /* the current job, written only while it is closed and no worker is inside */
    aotc_loop_fn fn;
    void *ctx;
    int shares; /* threads taking part */
    int64_t piece; /* iterations per piece */
    int64_t remaining __attribute__((aligned(64))); /* iterations not yet reported done */
    aotc_share share[AOTC_MAX_THREADS];
} pool = {
    .mutex = PTHREAD_MUTEX_INITIALIZER,
    .work = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .num_threads = 1,
};

/* Set once the count has been chosen (by a model's first run or by the application). */
static int configured;

/* Chunk i of k over [0, n): sizes differ by at most one, no overflow for any n. */
static int64_t chunk_begin(int64_t n, int64_t k, int64_t i) {
    int64_t rest = n % k;
    return i * (n / k) + (i < rest ? i : rest);
}

static uint64_t pack(uint64_t next, uint64_t end) {
    return next << 32 | end;
}

/* Piece p of share s as iterations. */
static void piece_range(const aotc_share *s, int64_t p, int64_t *begin, int64_t *end) {
    *begin = s->first + p * pool.piece;
    *end = s->last - *begin > pool.piece ? *begin + pool.piece : s->last;
}

/* The next piece for thread `self` (< shares): from the front of its own share, else
 * from the back of the share with the most pieces left.  0 when nothing is left. */
static int take_piece(int self, int64_t *begin, int64_t *end) {
    aotc_share *own = &pool.share[self];
    uint64_t word = __atomic_load_n(&own->pieces, __ATOMIC_RELAXED);
    while ((word >> 32) < (word & 0xffffffffu)) {
        if (__atomic_compare_exchange_n(&own->pieces, &word, word + (UINT64_C(1) << 32), 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            piece_range(own, (int64_t)(word >> 32), begin, end);
            return 1;
        }
    }
    for (;;) {
        int victim = -1;
        uint64_t most = 0, victim_word = 0;
        for (int i = 0; i < pool.shares; i++) {
            uint64_t w = __atomic_load_n(&pool.share[i].pieces, __ATOMIC_RELAXED);
            uint64_t left = (w >> 32) < (w & 0xffffffffu) ? (w & 0xffffffffu) - (w >> 32) : 0;
            if (left > most) {
                most = left;
                victim = i;
                victim_word = w;
            }
        }
        if (victim < 0) return 0;
        if (__atomic_compare_exchange_n(&pool.share[victim].pieces, &victim_word,
                                        victim_word - 1, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            piece_range(&pool.share[victim], (int64_t)(victim_word & 0xffffffffu) - 1, begin,
                        end);
            return 1;
        }
    }
}

/* Runs pieces of the current job until none are left, then reports them done; the
 * thread that finishes the job wakes the caller if it sleeps. */
static void run_pieces(int self) {
    int64_t begin, end, ran = 0;
    while (take_piece(self, &begin, &end)) {
        pool.fn(pool.ctx, begin, end, self);
        ran += end - begin;
    }
    if (ran && __atomic_sub_fetch(&pool.remaining, ran, __ATOMIC_SEQ_CST) == 0 && self != 0 &&
        __atomic_load_n(&pool.caller_sleeping, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&pool.mutex);
        pthread_cond_signal(&pool.done);
        pthread_mutex_unlock(&pool.mutex);
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

/* Spins until `ready(arg)` or `ns` pass (forever when ns < 0); whether it is.  It
 * yields every AOTC_YIELD_ROUNDS rounds of 64 pauses (a pause is about 25 ns on Zen 5,
 * sched_yield 0.5 us on a VM): often enough to hand the CPU to a thread queued behind
 * it, rarely enough that a job is seldom published while the spinner is in the kernel. */
#define AOTC_YIELD_ROUNDS 8
static int spin_until(int (*ready)(const void *), const void *arg, int64_t ns) {
    int64_t deadline = now_ns() + ns;
    for (int round = 1;; round++) {
        for (int i = 0; i < 64; i++) {
            if (ready(arg)) return 1;
            cpu_relax();
        }
        if (ns >= 0 && now_ns() > deadline) return 0;
        if (round % AOTC_YIELD_ROUNDS == 0) sched_yield();
    }
}

static uint64_t generation(uint64_t state) {
    return state >> GENERATION_SHIFT;
}

/* A worker's wake-up condition: a job it has not looked at, or a request to stop. */
static int job_published(const void *worker) {
    const aotc_worker *self = (const aotc_worker *)worker;
    return generation(__atomic_load_n(&pool.state, __ATOMIC_SEQ_CST)) != self->seen ||
           __atomic_load_n(&self->stop, __ATOMIC_SEQ_CST);
}

static int job_finished(const void *unused) {
    (void)unused;
    return __atomic_load_n(&pool.remaining, __ATOMIC_SEQ_CST) == 0;
}

static int no_worker_inside(const void *unused) {
    (void)unused;
    return (__atomic_load_n(&pool.state, __ATOMIC_ACQUIRE) & JOINED_MASK) == 0;
}

/* Enters job `g` if it is still the open job: 0 when a newer one is being written. */
static int join(uint64_t g) {
    uint64_t s = __atomic_load_n(&pool.state, __ATOMIC_ACQUIRE);
    while (generation(s) == g && !(s & CLOSED)) {
        if (__atomic_compare_exchange_n(&pool.state, &s, s + 1, 1, __ATOMIC_ACQUIRE,
                                        __ATOMIC_ACQUIRE))
            return 1;
    }
    return 0;
}

static void *worker_main(void *arg) {
    aotc_worker *self = (aotc_worker *)arg;
    for (;;) {
        if (!spin_until(job_published, self, AOTC_SPIN_NS)) {
            pthread_mutex_lock(&pool.mutex);
            __atomic_add_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
            while (!job_published(self)) pthread_cond_wait(&pool.work, &pool.mutex);
            __atomic_sub_fetch(&pool.sleepers, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&pool.mutex);
        }
        if (__atomic_load_n(&self->stop, __ATOMIC_SEQ_CST)) break;
        self->seen = generation(__atomic_load_n(&pool.state, __ATOMIC_SEQ_CST));
        if (join(self->seen)) {
            /* a job of fewer iterations than threads has fewer shares: the rest sit it out */
            if (self->index < pool.shares) run_pieces(self->index);
            __atomic_sub_fetch(&pool.state, 1, __ATOMIC_RELEASE);
        }
    }
    return NULL;
}

/* Starts workers until there are `wanted`; stops early if the system refuses threads. */
static void start_workers_locked(int wanted) {
    while (pool.num_workers < wanted) {
        aotc_worker *w = (aotc_worker *)calloc(1, sizeof *w);
        if (!w) return;
        w->seen = generation(__atomic_load_n(&pool.state, __ATOMIC_SEQ_CST));
        w->index = pool.num_workers + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            free(w);
            return;
        }
        __atomic_store_n(&pool.num_workers, pool.num_workers + 1, __ATOMIC_RELEASE);
        pool.workers[pool.num_workers - 1] = w;
    }
}

/* Closes the finished job to joiners once the workers still inside it have left. */
static void close_job(void) {
    for (;;) {
        uint64_t s = __atomic_load_n(&pool.state, __ATOMIC_ACQUIRE);
        if ((s & JOINED_MASK) == 0 &&
            __atomic_compare_exchange_n(&pool.state, &s, s | CLOSED, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return;
        spin_until(no_worker_inside, NULL, -1);
    }
}

void aotc_parallel_for(int64_t n, aotc_loop_fn fn, void *ctx) {
    int threads, workers;
    if (n <= 0) return;
    threads = __atomic_load_n(&pool.num_threads, __ATOMIC_ACQUIRE);
    if (threads <= 1 || n == 1 || __atomic_exchange_n(&pool.busy, 1, __ATOMIC_ACQUIRE)) {
        fn(ctx, 0, n, 0);
        return;
    }
    workers = __atomic_load_n(&pool.num_workers, __ATOMIC_ACQUIRE);
    if (workers < threads - 1) {
        pthread_mutex_lock(&pool.mutex);
        start_workers_locked(threads - 1);
        workers = pool.num_workers;
        pthread_mutex_unlock(&pool.mutex);
    }
    close_job();
    pool.fn = fn;
    pool.ctx = ctx;
    pool.shares = workers + 1 < n ? workers + 1 : (int)n;
    pool.piece = (n / pool.shares + AOTC_PIECES_PER_SHARE - 1) / AOTC_PIECES_PER_SHARE;
    for (int i = 0; i < pool.shares; i++) {
        aotc_share *s = &pool.share[i];
        s->first = chunk_begin(n, pool.shares, i);
        s->last = chunk_begin(n, pool.shares, i + 1);
        __atomic_store_n(&s->pieces, pack(0, (uint64_t)((s->last - s->first + pool.piece - 1) / pool.piece)),
                         __ATOMIC_RELAXED);
    }
    __atomic_store_n(&pool.remaining, n, __ATOMIC_RELAXED);
    /* open generation + 1, no worker inside */
    __atomic_store_n(&pool.state,
                     (generation(__atomic_load_n(&pool.state, __ATOMIC_RELAXED)) + 1)
                         << GENERATION_SHIFT,
                     __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&pool.sleepers, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&pool.mutex);
        pthread_cond_broadcast(&pool.work);
        pthread_mutex_unlock(&pool.mutex);
    }
    run_pieces(0);
    if (!spin_until(job_finished, NULL, AOTC_SPIN_NS)) {
        pthread_mutex_lock(&pool.mutex);
        __atomic_store_n(&pool.caller_sleeping, 1, __ATOMIC_SEQ_CST);
        while (!job_finished(NULL)) pthread_cond_wait(&pool.done, &pool.mutex);
        __atomic_store_n(&pool.caller_sleeping, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&pool.mutex);
    }
    __atomic_store_n(&pool.busy, 0, __ATOMIC_RELEASE);
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n <= 0 ? 1 : n > AOTC_MAX_THREADS ? AOTC_MAX_THREADS : (int)n;
}

/* Stops the workers past the first `keep` and joins them. */
static void stop_workers_beyond(int keep) {
    aotc_worker *surplus[AOTC_MAX_THREADS];
    int count = 0;
    pthread_mutex_lock(&pool.mutex);
    while (pool.num_workers > keep) {
        aotc_worker *w = pool.workers[pool.num_workers - 1];
        __atomic_store_n(&pool.num_workers, pool.num_workers - 1, __ATOMIC_RELEASE);
        __atomic_store_n(&w->stop, 1, __ATOMIC_SEQ_CST);
        surplus[count++] = w;
    }
    if (count) pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.mutex);
    /* Joined outside the lock: a stopping worker may still be finishing a piece, which
     * may need the mutex to report completion. */
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
    __atomic_store_n(&pool.num_threads, n, __ATOMIC_RELEASE);
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
    if (requested > AOTC_MAX_THREADS) requested = AOTC_MAX_THREADS;
    pthread_mutex_lock(&pool.mutex);
    if (!configured) {
        __atomic_store_n(&pool.num_threads, requested > 0 ? (int)requested : online_cpus(),
                         __ATOMIC_RELEASE);
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

/* -- external weights (aotc_runtime.h) ----------------------------------------- */

#define AOTC_WEIGHTS_ALIGN 64
#define AOTC_CHECKSUM_MULTIPLIER UINT64_C(0x9E3779B97F4A7C15)

static uint64_t checksum_mix(uint64_t x) {
    uint64_t y = x * AOTC_CHECKSUM_MULTIPLIER;
    return y ^ (y >> 32);
}

uint64_t aotc_weights_checksum(const void *weights, size_t size) {
    const unsigned char *bytes = weights;
    size_t words = size / 8;
    uint64_t sum = size;
    uint64_t word;
    for (size_t i = 0; i < words; i++) {
        memcpy(&word, bytes + 8 * i, 8); /* both targets are little-endian */
        sum += checksum_mix(word ^ i);
    }
    if (size % 8) {
        word = 0;
        memcpy(&word, bytes + 8 * words, size % 8);
        sum += checksum_mix(word ^ words);
    }
    return sum;
}

static int weights_status(const void *weights, size_t size, size_t expected_size,
                          uint64_t expected_checksum) {
    if (size != expected_size) return 1;
    if ((uintptr_t)weights % AOTC_WEIGHTS_ALIGN != 0) return 2;
    if (aotc_weights_checksum(weights, size) != expected_checksum) return 3;
    return 0;
}

int aotc_set_weights(const void **base, const void *weights, size_t size,
                     size_t expected_size, uint64_t expected_checksum) {
    int status = weights_status(weights, size, expected_size, expected_checksum);
    *base = status == 0 ? weights : NULL;
    return status;
}

int aotc_load_weights(const void **base, const char *path, size_t expected_size,
                      uint64_t expected_checksum) {
    struct stat file;
    void *mapped;
    int status;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *base = NULL;
    if (fd < 0) return 4;
    if (fstat(fd, &file) != 0 || file.st_size <= 0) {
        close(fd);
        return 4;
    }
    mapped = mmap(NULL, (size_t)file.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd); /* the mapping keeps the file */
    if (mapped == MAP_FAILED) return 4;
    status = aotc_set_weights(base, mapped, (size_t)file.st_size, expected_size,
                              expected_checksum);
    if (status != 0) munmap(mapped, (size_t)file.st_size);
    return status;
}
