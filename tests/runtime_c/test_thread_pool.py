"""runtime_c thread pool: a C driver checks results, real concurrency, nesting and shutdown.

The driver is linked with the runtime objects that `artifacts.compile_runtime` builds,
exactly the ones that go into every libNAME.a.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from aotc import artifacts
from aotc.resources import resource_dir

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler")

DRIVER = r"""
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "aotc_runtime.h"

#define N 10000000

static int64_t *data;
static unsigned char *visits;

/* n: the loop's length (0: not checked); users: the loop's pieces running with each
 * slot right now */
typedef struct { pthread_mutex_t lock; int64_t sum; int calls; int64_t n; int users[256]; } sum_ctx;

/* Pieces whose slot was out of range, or held by another piece of the same loop. */
static int bad_slots;

static void sum_body(void *p, int64_t begin, int64_t end, int64_t slot) {
    sum_ctx *ctx = (sum_ctx *)p;
    int64_t s = 0;
    int64_t slots = aotc_get_num_threads();
    int shared = 0;
    if (ctx->n > 0 && ctx->n < slots) slots = ctx->n;
    if (slot < 0 || slot >= slots || slot >= 256) {
        __atomic_add_fetch(&bad_slots, 1, __ATOMIC_RELAXED);
        slot = -1;
    } else {
        shared = __atomic_add_fetch(&ctx->users[slot], 1, __ATOMIC_ACQ_REL) != 1;
    }
    for (int64_t i = begin; i < end; i++) {
        s += data[i];
        visits[i]++;
    }
    if (slot >= 0) {
        shared |= __atomic_sub_fetch(&ctx->users[slot], 1, __ATOMIC_ACQ_REL) != 0;
        if (shared) __atomic_add_fetch(&bad_slots, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_lock(&ctx->lock);
    ctx->sum += s;
    ctx->calls++;
    pthread_mutex_unlock(&ctx->lock);
}

/* Sums data[0, n) with the pool; checks each index is visited exactly once. */
static int check_sum(int64_t n, const char *label) {
    sum_ctx ctx = {PTHREAD_MUTEX_INITIALIZER, 0, 0, n, {0}};
    int64_t expected = 0;
    for (int64_t i = 0; i < n; i++) { expected += data[i]; visits[i] = 0; }
    aotc_parallel_for(n, sum_body, &ctx);
    for (int64_t i = 0; i < n; i++) {
        if (visits[i] != 1) {
            printf("%s: index %lld visited %d times\n", label, (long long)i, visits[i]);
            return 1;
        }
    }
    printf("%s threads=%d calls=%d sum=%lld expected=%lld\n", label, aotc_get_num_threads(),
           ctx.calls, (long long)ctx.sum, (long long)expected);
    return ctx.sum != expected;
}

/* Every chunk waits until `want` chunks run at once: passes only with real threads. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int arrived, want, timed_out;
} barrier_ctx;

static void barrier_body(void *p, int64_t begin, int64_t end, int64_t slot) {
    barrier_ctx *b = (barrier_ctx *)p;
    struct timespec deadline;
    (void)begin; (void)end; (void)slot;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 20;
    pthread_mutex_lock(&b->lock);
    if (++b->arrived >= b->want) pthread_cond_broadcast(&b->cv);
    while (b->arrived < b->want && !b->timed_out)
        if (pthread_cond_timedwait(&b->cv, &b->lock, &deadline) != 0) b->timed_out = 1;
    pthread_mutex_unlock(&b->lock);
}

/* The caller's first piece waits until another thread has run a piece of the caller's
 * share: passes only if threads that are done take over a slow thread's work. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    pthread_t caller;
    int64_t share_end;
    int stolen, timed_out;
} steal_ctx;

static void steal_body(void *p, int64_t begin, int64_t end, int64_t slot) {
    steal_ctx *s = (steal_ctx *)p;
    struct timespec deadline;
    (void)end; (void)slot;
    pthread_mutex_lock(&s->lock);
    if (pthread_equal(pthread_self(), s->caller)) {
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 20;
        while (begin == 0 && !s->stolen && !s->timed_out)
            if (pthread_cond_timedwait(&s->cv, &s->lock, &deadline) != 0) s->timed_out = 1;
    } else if (begin < s->share_end) {
        s->stolen = 1;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->lock);
}

static void nested_body(void *p, int64_t begin, int64_t end, int64_t slot) {
    sum_ctx inner = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 1000, {0}};
    for (int64_t i = begin; i < end; i++)
        aotc_parallel_for(1000, sum_body, &inner);  /* the pool is busy: runs inline */
    (void)slot;
    pthread_mutex_lock(&((sum_ctx *)p)->lock);
    ((sum_ctx *)p)->sum += inner.sum;
    pthread_mutex_unlock(&((sum_ctx *)p)->lock);
}

static void *app_thread(void *arg) {
    sum_ctx ctx = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 100000, {0}};
    int i;
    (void)arg;
    for (i = 0; i < 50; i++) aotc_parallel_for(100000, sum_body, &ctx);
    return (void *)(intptr_t)(ctx.sum != 50 * (int64_t)100000 * 99999 / 2);
}

int main(void) {
    int failures = 0;
    data = malloc(N * sizeof *data);
    visits = malloc(N);
    for (int64_t i = 0; i < N; i++) data[i] = (i * 2654435761u) % 1000003;

    if (aotc_get_num_threads() != 1) failures++;
    failures += check_sum(N, "default");
    aotc_set_num_threads(4);
    failures += check_sum(N, "four");
    failures += check_sum(3, "tiny");
    failures += check_sum(0, "empty");

    {
        barrier_ctx b = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 4, 0};
        aotc_parallel_for(4, barrier_body, &b);
        printf("concurrent chunks: %d%s\n", b.arrived, b.timed_out ? " (timed out)" : "");
        failures += b.timed_out;
    }
    {
        /* four threads share [0, 64): the caller's share is [0, 16) */
        steal_ctx s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, pthread_self(), 16, 0, 0};
        aotc_parallel_for(64, steal_body, &s);
        printf("caller's share taken over: %d%s\n", s.stolen, s.timed_out ? " (timed out)" : "");
        failures += !s.stolen;
    }
    {
        sum_ctx outer = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, {0}};
        for (int64_t i = 0; i < 1000; i++) data[i] = 1;
        aotc_parallel_for(8, nested_body, &outer);
        printf("nested sum=%lld\n", (long long)outer.sum);
        failures += outer.sum != 8 * 1000;
    }
    {
        /* two application threads share the pool (one runs inline while it is busy) */
        pthread_t t[2];
        void *bad[2];
        for (int64_t i = 0; i < 100000; i++) data[i] = i;
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, app_thread, NULL);
        for (int i = 0; i < 2; i++) { pthread_join(t[i], &bad[i]); failures += bad[i] != NULL; }
        printf("app threads done\n");
    }
    {
        /* back-to-back small jobs, picked up by spinning workers; then workers are
         * stopped while they spin */
        int64_t wrong = 0;
        for (int64_t i = 0; i < 64; i++) data[i] = i;
        for (int r = 0; r < 20000; r++) {
            sum_ctx ctx = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 64, {0}};
            aotc_parallel_for(64, sum_body, &ctx);
            wrong += ctx.sum != 64 * 63 / 2;
        }
        printf("burst wrong=%lld\n", (long long)wrong);
        failures += wrong != 0;
    }
    aotc_set_num_threads(2);
    failures += check_sum(N, "two");
    aotc_set_num_threads(1);
    failures += check_sum(N, "one again");
    aotc_set_num_threads(0);
    printf("auto threads=%d\n", aotc_get_num_threads());
    failures += aotc_get_num_threads() < 1;
    aotc_set_num_threads(1);
    printf("bad slots=%d\n", bad_slots);
    failures += bad_slots != 0;
    printf("failures=%d\n", failures);
    return failures != 0;
}
"""


def test_thread_pool(tmp_path):
    runtime = artifacts.compile_runtime(tmp_path / "rt")
    (tmp_path / "driver.c").write_text(DRIVER)
    driver = tmp_path / "driver"
    flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"]
    subprocess.run(
        [
            CC,
            *flags,
            f"-I{resource_dir('runtime_c')}",
            "driver.c",
            *map(str, runtime),
            "-o",
            str(driver),
        ],
        cwd=tmp_path,
        check=True,
    )
    result = subprocess.run([str(driver)], capture_output=True, text=True, timeout=120, check=False)
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("default threads=1 calls=1 ")  # one thread: one inline call
    # each of the four threads' shares is run in about 8 pieces
    four = re.fullmatch(r"four threads=4 calls=(\d+) .*", lines[1])
    assert four and 4 <= int(four.group(1)) <= 4 * 9, lines[1]
    assert lines[2].startswith("tiny threads=4 calls=3 ")
    assert "concurrent chunks: 4" in lines
    assert "caller's share taken over: 1" in lines
    # every piece ran with a slot below min(threads, n) that no other piece held then
    assert "bad slots=0" in lines
    assert "burst wrong=0" in lines
    assert lines[-1] == "failures=0"


def test_runtime_compiles_cleanly(tmp_path):
    """Strict warnings stay clean (the build itself uses -Wall only)."""
    source = resource_dir("runtime_c") / "aotc_runtime.c"
    flags = ["-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-pthread", "-c"]
    subprocess.run([CC, *flags, str(source), "-o", str(tmp_path / "rt.o")], check=True)


def test_runtime_symbols_are_prefixed(tmp_path):
    objects = artifacts.compile_runtime(tmp_path)
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    assert [Path(o).name for o in objects] == ["aotc_bounded.o", "aotc_runtime.o"]
    for obj in objects:
        argv = [nm, "-g", "--defined-only", str(obj)]
        out = subprocess.run(argv, capture_output=True, text=True, check=True)
        names = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
        assert names and all(n.startswith("aotc_") for n in names), (obj, names)


CAPACITY_DRIVER = r"""
#include <stdio.h>
#include "aotc_runtime.h"

static void count_body(void *p, int64_t begin, int64_t end, int64_t slot) {
    (void)slot;
    __atomic_add_fetch((int64_t *)p, end - begin, __ATOMIC_RELAXED);
}

static int run(int64_t n) {
    int64_t done = 0;
    aotc_parallel_for(n, count_body, &done);
    printf("threads=%d done=%lld\n", aotc_get_num_threads(), (long long)done);
    return done != n;
}

int main(void) {
    int failures = 0;
    aotc_configure_threads(COMPILED);  /* a model's compiled-in count */
    failures += run(1000000);
    aotc_set_num_threads(3);
    failures += run(1000000);
    aotc_set_num_threads(100000);
    failures += run(1000000);
    aotc_set_num_threads(1);
    failures += run(1000);
    return failures;
}
"""


@pytest.mark.parametrize("compiled", [300, 100000])
def test_thread_counts_beyond_the_pool_are_clamped(tmp_path, compiled):
    """A compiled-in count of 300 runs as asked; one past the pool's capacity, or a
    count set later past it, runs at the capacity; changing counts then stays safe."""
    from aotc.artifacts.runtime import MAX_THREADS

    runtime = artifacts.compile_runtime(tmp_path / "rt")
    (tmp_path / "driver.c").write_text(CAPACITY_DRIVER.replace("COMPILED", str(compiled)))
    driver = tmp_path / "driver"
    subprocess.run(
        [CC, "-O2", "-Wall", "-Werror", "-pthread", f"-I{resource_dir('runtime_c')}", "driver.c"]
        + [*map(str, runtime), "-o", str(driver)],
        cwd=tmp_path,
        check=True,
    )
    result = subprocess.run([str(driver)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    counts = [int(line.split()[0].split("=")[1]) for line in result.stdout.splitlines()]
    assert counts == [min(compiled, MAX_THREADS), 3, MAX_THREADS, 1]


def test_the_pool_capacity_is_the_compilers():
    from aotc.artifacts.runtime import MAX_THREADS

    source = (resource_dir("runtime_c") / "aotc_runtime.c").read_text()
    assert f"#define AOTC_MAX_THREADS {MAX_THREADS}\n" in source
