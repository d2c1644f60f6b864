/*
 * aotc_bounded.c: compact buffers at actual extents in and out of a model compiled with
 * bounded dims (see aotc_bounded.h).  The scratch holds, after the model's own bytes,
 * every input at its bounds, input_dims, every output at its bounds and output_dims,
 * each at the next multiple of ALIGN.  aotc_bounded_run works on addresses of any
 * memory through the copies it is given: the host's (aotc_run_bounded, memcpy) or a
 * device's (aotc_cuda.c).
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

size_t aotc_bounded_padded_bytes(int n_inputs, const aotc_bounded_tensor *inputs_desc,
                                 int n_outputs, const aotc_bounded_tensor *outputs_desc) {
    size_t n = 0;
    for (int i = 0; i < n_inputs; ++i) n += align_up(padded_bytes(&inputs_desc[i]));
    n += align_up(sizeof(int32_t) * (size_t)count_bounded(n_inputs, inputs_desc));
    for (int i = 0; i < n_outputs; ++i) n += align_up(padded_bytes(&outputs_desc[i]));
    n += align_up(sizeof(int32_t) * (size_t)count_bounded(n_outputs, outputs_desc));
    return n;
}

size_t aotc_bounded_scratch_bytes(size_t model_scratch_bytes, int n_inputs,
                                  const aotc_bounded_tensor *inputs_desc, int n_outputs,
                                  const aotc_bounded_tensor *outputs_desc) {
    return align_up(model_scratch_bytes) +
           aotc_bounded_padded_bytes(n_inputs, inputs_desc, n_outputs, outputs_desc);
}

/* Copies the box of extents `dims` between a compact array and one stored at `bounds`
 * (to_padded: from the compact one): rows of the last dim, each row's offsets found by
 * splitting its number by the dims. */
static int copy_box(const aotc_bounded_memory *mem, void *user, uintptr_t padded,
                    uintptr_t compact, int to_padded, const aotc_bounded_tensor *t,
                    const int64_t *dims) {
    int r = t->rank;
    size_t row = t->itemsize * (size_t)(r ? dims[r - 1] : 1);
    int64_t rows = 1;
    for (int d = 0; d + 1 < r; ++d) rows *= dims[d];
    if (row == 0) return 0;
    for (int64_t k = 0; k < rows; ++k) {
        int64_t rest = k, at = 0, stride = r ? t->bounds[r - 1] : 1;
        for (int d = r - 2; d >= 0; --d) {
            at += (rest % dims[d]) * stride;
            rest /= dims[d];
            stride *= t->bounds[d];
        }
        uintptr_t slot = padded + (uintptr_t)at * t->itemsize;
        uintptr_t dense = compact + (uintptr_t)k * row;
        int status = to_padded ? mem->copy(user, slot, dense, row) : mem->copy(user, dense, slot, row);
        if (status != 0) return status;
    }
    return 0;
}

int aotc_bounded_run(const aotc_bounded_memory *mem, void *user, uintptr_t padded,
                     int n_inputs, const aotc_bounded_tensor *inputs_desc,
                     const uintptr_t *inputs, const int64_t *input_dims, int n_outputs,
                     const aotc_bounded_tensor *outputs_desc, const uintptr_t *outputs,
                     int64_t *output_dims, int has_output_dims) {
    const int64_t *dims = input_dims;
    int status, k = 0;
    for (int i = 0; i < n_inputs; ++i) {
        const aotc_bounded_tensor *t = &inputs_desc[i];
        for (int d = 0; d < t->rank; ++d)
            if (dims[d] < t->low[d] || dims[d] > t->bounds[d]) return AOTC_BOUNDED_OUT_OF_RANGE;
        dims += t->rank;
    }
    uintptr_t in_ptrs[n_inputs + 1];
    uintptr_t out_ptrs[n_outputs + 1];
    int32_t extents[count_bounded(n_inputs, inputs_desc) + 1];
    int32_t out_extents[count_bounded(n_outputs, outputs_desc) + 1];
    uintptr_t next = padded;
    dims = input_dims;
    for (int i = 0; i < n_inputs; ++i) {
        const aotc_bounded_tensor *t = &inputs_desc[i];
        if ((status = copy_box(mem, user, next, inputs[i], 1, t, dims)) != 0) return status;
        in_ptrs[i] = next;
        next += align_up(padded_bytes(t));
        for (int d = 0; d < t->rank; ++d)
            if (t->low[d] != t->bounds[d]) extents[k++] = (int32_t)dims[d];
        dims += t->rank;
    }
    if ((status = mem->put(user, next, extents, sizeof(int32_t) * (size_t)k)) != 0) return status;
    in_ptrs[n_inputs] = next;
    next += align_up(sizeof(int32_t) * (size_t)k);
    for (int i = 0; i < n_outputs; ++i) {
        out_ptrs[i] = next;
        next += align_up(padded_bytes(&outputs_desc[i]));
    }
    out_ptrs[n_outputs] = next;
    if ((status = mem->run(user, in_ptrs, out_ptrs)) != 0) return status;
    k = count_bounded(n_outputs, outputs_desc);
    if (has_output_dims && (status = mem->get(user, out_extents, next, sizeof(int32_t) * (size_t)k)) != 0)
        return status;
    k = 0;
    int64_t *written = output_dims;
    for (int i = 0; i < n_outputs; ++i) {
        const aotc_bounded_tensor *t = &outputs_desc[i];
        for (int d = 0; d < t->rank; ++d) {
            int bounded = has_output_dims && t->low[d] != t->bounds[d];
            written[d] = bounded ? (int64_t)out_extents[k++] : t->bounds[d];
        }
        if ((status = copy_box(mem, user, out_ptrs[i], outputs[i], 0, t, written)) != 0)
            return status;
        written += t->rank;
    }
    return 0;
}

/* -- the host's memory -------------------------------------------------------------- */

typedef struct {
    aotc_run_fn run;
    void *scratch;
} host_call;

static int host_copy(void *user, uintptr_t dst, uintptr_t src, size_t bytes) {
    (void)user;
    memcpy((void *)dst, (const void *)src, bytes);
    return 0;
}

static int host_get(void *user, void *dst, uintptr_t src, size_t bytes) {
    (void)user;
    memcpy(dst, (const void *)src, bytes);
    return 0;
}

static int host_put(void *user, uintptr_t dst, const void *src, size_t bytes) {
    (void)user;
    memcpy((void *)dst, src, bytes);
    return 0;
}

static int host_run(void *user, const uintptr_t *inputs, const uintptr_t *outputs) {
    const host_call *call = (const host_call *)user;
    return call->run((void *const *)inputs, (void *const *)outputs, call->scratch);
}

int aotc_run_bounded(aotc_run_fn run, void *scratch, size_t model_scratch_bytes,
                     int n_inputs, const aotc_bounded_tensor *inputs_desc,
                     const void *const *inputs, const int64_t *input_dims,
                     int n_outputs, const aotc_bounded_tensor *outputs_desc,
                     void *const *outputs, int64_t *output_dims, int has_output_dims) {
    static const aotc_bounded_memory host = {host_copy, host_put, host_get, host_run};
    if (scratch == NULL || (uintptr_t)scratch % ALIGN != 0) return 1;
    host_call call = {run, scratch};
    uintptr_t padded = (uintptr_t)scratch + align_up(model_scratch_bytes);
    size_t inputs_bytes = 0; /* the inputs' padding: defined bytes, though never a value */
    for (int i = 0; i < n_inputs; ++i) inputs_bytes += align_up(padded_bytes(&inputs_desc[i]));
    memset((void *)padded, 0, inputs_bytes);
    uintptr_t in[n_inputs + 1], out[n_outputs + 1];
    for (int i = 0; i < n_inputs; ++i) in[i] = (uintptr_t)inputs[i];
    for (int i = 0; i < n_outputs; ++i) out[i] = (uintptr_t)outputs[i];
    int status = aotc_bounded_run(&host, &call, padded, n_inputs, inputs_desc, in, input_dims,
                                  n_outputs, outputs_desc, out, output_dims, has_output_dims);
    return status == AOTC_BOUNDED_OUT_OF_RANGE ? 3 : status;
}
