/*
 * Reads handwritten digits and prints what the compiled digits model says each one is.
 *
 *   digits IMAGE.pgm...   each an 8x8 binary PGM (P5, any maxval up to 255), as
 *                         examples/digits/images/ holds; prints "IMAGE: N (p = 0.97)".
 *
 * Build (from the repository root):
 *   aotc compile examples/digits/digits.onnx -o build
 *   cc examples/digits/main.c -Ibuild build/libdigits.a -lm -lpthread -o digits
 *   ./digits examples/digits/images/[0-9]_*.pgm   (every image there)
 */
#include <stdio.h>
#include <stdlib.h>

#include "digits.h"

/* the pixels of an 8x8 PGM scaled to 0..1, as the model was trained; 0 on success */
static int read_pgm(const char *path, float *pixels) {
    unsigned char raw[DIGITS_PIXELS_SIZE];
    int width, height, maxval;
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    if (fscanf(f, "P5 %d %d %d", &width, &height, &maxval) != 3 || fgetc(f) == EOF ||
        width != 8 || height != 8 || maxval < 1 || maxval > 255 ||
        fread(raw, 1, sizeof raw, f) != sizeof raw) {
        fprintf(stderr, "%s: not an 8x8 binary PGM\n", path);
        fclose(f);
        return -1;
    }
    fclose(f);
    for (unsigned i = 0; i < DIGITS_PIXELS_SIZE; i++) pixels[i] = (float)raw[i] / (float)maxval;
    return 0;
}

int main(int argc, char **argv) {
    static float pixels[DIGITS_PIXELS_SIZE], probs[DIGITS_PROBS_SIZE];
    /* C11 aligned_alloc: NAME_SCRATCH_BYTES is a multiple of the alignment */
    void *scratch = DIGITS_SCRATCH_BYTES ? aligned_alloc(DIGITS_SCRATCH_ALIGN, DIGITS_SCRATCH_BYTES) : NULL;
    int failed = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s IMAGE.pgm...\n", argv[0]);
        return 2;
    }
    if (DIGITS_SCRATCH_BYTES && !scratch) {
        fputs("out of memory\n", stderr);
        return 1;
    }
    for (int a = 1; a < argc; a++) {
        unsigned best = 0;
        if (read_pgm(argv[a], pixels) != 0 || digits_run(pixels, probs, scratch) != 0) {
            failed = 1;
            continue;
        }
        for (unsigned d = 1; d < DIGITS_PROBS_SIZE; d++)
            if (probs[d] > probs[best]) best = d;
        printf("%s: %u (p = %.2f)\n", argv[a], best, probs[best]);
    }
    free(scratch);
    return failed;
}
