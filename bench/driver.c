/*
 * driver.c: times one aotc-compiled model from C, for bench/run.py.
 *
 * run.py builds it once per model, naming the model's symbols with -D flags:
 *
 *   cc -O2 -I BUILD -DAOTC_HEADER='"m.h"' -DAOTC_NAME=m -DAOTC_UPPER=M
 *      '-DAOTC_CALL(in,out,s)=m_run(in[0],out[0],s)' [-DAOTC_SET_THREADS=m_set_num_threads]
 *      driver.c BUILD/libm.a -lm -lpthread
 *
 * AOTC_CALL calls NAME_run itself (not the pointer-array entry), as an application would.
 *
 * Usage: driver INPUTS.bin OUTPUTS.bin THREADS
 *   INPUTS.bin holds every input's bytes back to back, in the header's order.
 * Then it answers commands on stdin, one line each:
 *   "N K"  takes N samples, each the mean time of K back-to-back runs, and prints one
 *          line of N numbers: nanoseconds per run (warm-up is a command like any other)
 *   "q"    writes every output's bytes back to back to OUTPUTS.bin and exits 0
 * The process stays alive between commands so that run.py can interleave it with
 * onnxruntime without paying start-up (page faults on the weights) again.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include AOTC_HEADER

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define NUM_INPUTS CAT(AOTC_UPPER, _NUM_INPUTS)
#define NUM_OUTPUTS CAT(AOTC_UPPER, _NUM_OUTPUTS)
#define SCRATCH_BYTES CAT(AOTC_UPPER, _SCRATCH_BYTES)
#define SCRATCH_ALIGN CAT(AOTC_UPPER, _SCRATCH_ALIGN)
#define INPUTS CAT(AOTC_NAME, _inputs_desc)
#define OUTPUTS CAT(AOTC_NAME, _outputs_desc)

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* aligned_alloc wants a size that is a multiple of the alignment; never 0 bytes. */
static void *alloc(size_t bytes, size_t align) {
    size_t rounded = (bytes + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
    if (!p) {
        fprintf(stderr, "driver: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s INPUTS.bin OUTPUTS.bin THREADS\n", argv[0]);
        return 2;
    }
    size_t n_in = NUM_INPUTS, n_out = NUM_OUTPUTS;
    void **in = calloc(n_in + 1, sizeof(void *));
    void **out = calloc(n_out + 1, sizeof(void *));
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    for (size_t i = 0; i < n_in; i++) {
        size_t bytes = INPUTS[i].bytes;
        in[i] = alloc(bytes, 64);
        if (fread(in[i], 1, bytes, f) != bytes) {
            fprintf(stderr, "driver: %s is shorter than the inputs\n", argv[1]);
            return 2;
        }
    }
    if (fgetc(f) != EOF) {
        fprintf(stderr, "driver: %s is longer than the inputs\n", argv[1]);
        return 2;
    }
    fclose(f);
    for (size_t i = 0; i < n_out; i++) out[i] = alloc(OUTPUTS[i].bytes, 64);
    void *scratch = alloc(SCRATCH_BYTES, SCRATCH_ALIGN);
#ifdef AOTC_SET_THREADS
    AOTC_SET_THREADS(atoi(argv[3]));
#endif

    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] == 'q') break;
        long samples = 0, runs = 0;
        if (sscanf(line, "%ld %ld", &samples, &runs) != 2 || samples < 1 || runs < 1) {
            fprintf(stderr, "driver: bad command '%s'\n", line);
            return 2;
        }
        for (long s = 0; s < samples; s++) {
            double start = now_ns();
            for (long r = 0; r < runs; r++) {
                int status = AOTC_CALL(in, out, scratch);
                if (status != 0) {
                    fprintf(stderr, "driver: the model returned %d\n", status);
                    return 3;
                }
            }
            printf(s ? " %.1f" : "%.1f", (now_ns() - start) / (double)runs);
        }
        printf("\n");
        fflush(stdout);
    }

    f = fopen(argv[2], "wb");
    if (!f) {
        perror(argv[2]);
        return 2;
    }
    for (size_t i = 0; i < n_out; i++) {
        if (fwrite(out[i], 1, OUTPUTS[i].bytes, f) != OUTPUTS[i].bytes) {
            perror(argv[2]);
            return 2;
        }
    }
    return fclose(f) == 0 ? 0 : 2;
}
