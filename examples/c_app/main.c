/*
 * Runs the compiled mnist model from C.
 *
 *   app [INPUT]   INPUT: MNIST_INPUT_BYTES of raw float32 (native byte order); without
 *                 it, a fixed pattern.  Prints each probability ("%.9g"), then the argmax.
 *
 * Build (from the repository root, after `aotc compile examples/mnist/mnist.onnx -o build`):
 *   cc examples/c_app/main.c -Ibuild build/libmnist.a -lm -lpthread -o app
 */
#include <stdio.h>
#include <stdlib.h>

#include "mnist.h"

static float input[MNIST_INPUT_SIZE];
static float probs[MNIST_PROBS_SIZE];

static int read_input(const char *path) {
    FILE *f = fopen(path, "rb");
    size_t got;
    int extra;
    if (!f) {
        perror(path);
        return -1;
    }
    got = fread(input, 1, MNIST_INPUT_BYTES, f);
    extra = fgetc(f);
    fclose(f);
    if (got != MNIST_INPUT_BYTES || extra != EOF) {
        fprintf(stderr, "%s: expected exactly %u bytes of float32\n", path,
                (unsigned)MNIST_INPUT_BYTES);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    void *scratch = NULL; /* NULL would use the model's static arena (not reentrant) */
    size_t i, best = 0;
    int status;

    if (argc > 2) {
        fprintf(stderr, "usage: %s [input.f32]\n", argv[0]);
        return 2;
    }
    if (argc == 2) {
        if (read_input(argv[1]) != 0) return 2;
    } else {
        for (i = 0; i < MNIST_INPUT_SIZE; i++) input[i] = (float)((i * 37u) % 256u) / 255.0f;
    }
    if (MNIST_SCRATCH_BYTES != 0) {
        /* C11 aligned_alloc: the size is a multiple of the alignment, as it must be */
        scratch = aligned_alloc(MNIST_SCRATCH_ALIGN, MNIST_SCRATCH_BYTES);
        if (!scratch) {
            fprintf(stderr, "out of memory (%u bytes of scratch)\n",
                    (unsigned)MNIST_SCRATCH_BYTES);
            return 1;
        }
    }
    status = mnist_run(input, probs, scratch);
    free(scratch);
    if (status != 0) {
        fprintf(stderr, "mnist_run failed with status %d\n", status);
        return 1;
    }
    for (i = 0; i < MNIST_PROBS_SIZE; i++) {
        printf("%.9g\n", probs[i]);
        if (probs[i] > probs[best]) best = i;
    }
    printf("argmax: %u\n", (unsigned)best);
    return 0;
}
