/*
 * aotc_bounded.c: compact buffers at actual extents in and out of a model compiled with
 * bounded dims (see aotc_bounded.h).  The scratch holds, after the model's own bytes,
 * every input at its bounds, input_dims, every output at its bounds and output_dims,
 * each at the next multiple of ALIGN.
 */
#include "aotc_bounded.h"

#include <string.h>

#define ALIGN 64u

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static size_t padded_bytes(const aotc_bounded_tensor *t) {
    size_t n = t->itemsize;
    for (int d = 0; d < t->rank; ++d) n *= (size_t)t->bounds[d];
    return n;
}

static int bounded_dims(const aotc_bounded_tensor *t) {
    int n = 0;
    for (int d = 0; d < t->rank; ++d) n += t->low[d] != t->bounds[d];
    return n;
}

static int count_bounded(int n, const aotc_bounded_tensor *ts) {
    int total = 0;
    for (int i = 0; i < n; ++i) total += bounded_dims(&ts[i]);
    return total;
}

size_t aotc_bounded_scratch_bytes(size_t model_scratch_bytes, int n_inputs,
                                  const aotc_bounded_tensor *inputs_desc, int n_outputs,
                                  const aotc_bounded_tensor *outputs_desc) {
    size_t n = align_up(model_scratch_bytes);
    for (int i = 0; i < n_inputs; ++i) n += align_up(padded_bytes(&inputs_desc[i]));
    n += align_up(sizeof(int32_t) * (size_t)count_bounded(n_inputs, inputs_desc));
    for (int i = 0; i < n_outputs; ++i) n += align_up(padded_bytes(&outputs_desc[i]));
    n += align_up(sizeof(int32_t) * (size_t)count_bounded(n_outputs, outputs_desc));
    return n;
}

/* Copies the box of extents `dims` between a compact array and one stored at `bounds`:
 * rows of the last dim, each row's offsets found by splitting its number by the dims. */
static void copy_box(char *padded, const char *compact_in, char *compact_out,
                     const aotc_bounded_tensor *t, const int64_t *dims) {
    int r = t->rank;
    size_t row = t->itemsize * (size_t)(r ? dims[r - 1] : 1);
    int64_t rows = 1;
    for (int d = 0; d + 1 < r; ++d) rows *= dims[d];
    if (row == 0) return;
    for (int64_t k = 0; k < rows; ++k) {
        int64_t rest = k, at = 0, stride = r ? t->bounds[r - 1] : 1;
        for (int d = r - 2; d >= 0; --d) {
            at += (rest % dims[d]) * stride;
            rest /= dims[d];
            stride *= t->bounds[d];
        }
        char *slot = padded + (size_t)at * t->itemsize;
        if (compact_in) memcpy(slot, compact_in + (size_t)k * row, row);
        else memcpy(compact_out + (size_t)k * row, slot, row);
    }
}

int aotc_run_bounded(aotc_run_fn run, void *scratch, size_t model_scratch_bytes,
                     int n_inputs, const aotc_bounded_tensor *inputs_desc,
                     const void *const *inputs, const int64_t *input_dims,
                     int n_outputs, const aotc_bounded_tensor *outputs_desc,
                     void *const *outputs, int64_t *output_dims, int has_output_dims) {
    if (scratch == NULL || (uintptr_t)scratch % ALIGN != 0) return 1;
    const int64_t *dims = input_dims;
    for (int i = 0; i < n_inputs; ++i) {
        const aotc_bounded_tensor *t = &inputs_desc[i];
        for (int d = 0; d < t->rank; ++d)
            if (dims[d] < t->low[d] || dims[d] > t->bounds[d]) return 3;
        dims += t->rank;
    }
    void *in_ptrs[n_inputs + 1];
    void *out_ptrs[n_outputs + 1];
    char *next = (char *)scratch + align_up(model_scratch_bytes);
    dims = input_dims;
    for (int i = 0; i < n_inputs; ++i) {
        const aotc_bounded_tensor *t = &inputs_desc[i];
        size_t bytes = padded_bytes(t);
        memset(next, 0, bytes); /* the padding: defined bytes, though never a value */
        copy_box(next, inputs[i], NULL, t, dims);
        in_ptrs[i] = next;
        next += align_up(bytes);
        dims += t->rank;
    }
    int32_t *extents = (int32_t *)next;
    int k = 0;
    dims = input_dims;
    for (int i = 0; i < n_inputs; ++i) {
        const aotc_bounded_tensor *t = &inputs_desc[i];
        for (int d = 0; d < t->rank; ++d)
            if (t->low[d] != t->bounds[d]) extents[k++] = (int32_t)dims[d];
        dims += t->rank;
    }
    in_ptrs[n_inputs] = extents;
    next += align_up(sizeof(int32_t) * (size_t)k);
    for (int i = 0; i < n_outputs; ++i) {
        out_ptrs[i] = next;
        next += align_up(padded_bytes(&outputs_desc[i]));
    }
    int32_t *out_extents = (int32_t *)next;
    out_ptrs[n_outputs] = out_extents;
    int status = run(in_ptrs, out_ptrs, scratch);
    if (status != 0) return status;
    k = 0;
    int64_t *written = output_dims;
    for (int i = 0; i < n_outputs; ++i) {
        const aotc_bounded_tensor *t = &outputs_desc[i];
        for (int d = 0; d < t->rank; ++d) {
            int bounded = has_output_dims && t->low[d] != t->bounds[d];
            written[d] = bounded ? (int64_t)out_extents[k++] : t->bounds[d];
        }
        copy_box(out_ptrs[i], NULL, outputs[i], t, written);
        written += t->rank;
    }
    return 0;
}
