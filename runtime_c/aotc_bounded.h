/*
 * aotc_bounded.h: calling a model compiled with bounded dims (aotc compile --input
 * x=1..8x128, --dim batch=1..8) at its actual extents.
 *
 * Such a model's NAME_run works on buffers at the bounds, the values at the first
 * extents of each dim, with one more input (int32 input_dims: the actual extents of
 * the inputs' bounded dims, input by input, dim by dim) and, where an output has
 * bounded dims, one more output (int32 output_dims, the same for the outputs).
 * aotc_run_bounded takes compact buffers at the actual extents instead: it copies the
 * inputs into padded buffers in the scratch, runs, and copies the outputs out.
 */
#ifndef AOTC_BOUNDED_H_
#define AOTC_BOUNDED_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One input or output of a model with bounded dims. */
typedef struct {
    int rank;
    const int64_t *bounds; /* rank entries: the extents it is stored at */
    const int64_t *low;    /* rank entries: the least extent; low[d] == bounds[d]: static */
    size_t itemsize;       /* bytes per element */
} aotc_bounded_tensor;

/* NAME_run_generic: inputs, outputs, scratch -> status. */
typedef int (*aotc_run_fn)(void *const *inputs, void *const *outputs, void *scratch);

/*
 * Runs `run` on compact inputs at the extents `input_dims` (every dim of every input,
 * in order), writing compact outputs and every dim of every output to `output_dims`.
 * scratch: aotc_bounded_scratch_bytes(...) bytes (the header's
 * NAME_BOUNDED_SCRATCH_BYTES), aligned to 64: the model's own scratch first, then the
 * padded buffers.  `has_output_dims`: whether the model returns output_dims (it does
 * where an output has bounded dims).  Returns 0, 1 if scratch is NULL or not aligned,
 * 3 if an extent is outside its input's range, else run's nonzero status.
 */
int aotc_run_bounded(aotc_run_fn run, void *scratch, size_t model_scratch_bytes,
                     int n_inputs, const aotc_bounded_tensor *inputs_desc,
                     const void *const *inputs, const int64_t *input_dims,
                     int n_outputs, const aotc_bounded_tensor *outputs_desc,
                     void *const *outputs, int64_t *output_dims, int has_output_dims);

/* The scratch bytes aotc_run_bounded needs (the header's macro holds the same). */
size_t aotc_bounded_scratch_bytes(size_t model_scratch_bytes, int n_inputs,
                                  const aotc_bounded_tensor *inputs_desc, int n_outputs,
                                  const aotc_bounded_tensor *outputs_desc);

/* Of those, the padded buffers' and the extents' (after the model's own scratch). */
size_t aotc_bounded_padded_bytes(int n_inputs, const aotc_bounded_tensor *inputs_desc,
                                 int n_outputs, const aotc_bounded_tensor *outputs_desc);

/* aotc_bounded_run's code for an extent outside its input's range (or a fixed dim's
 * other than its own). */
#define AOTC_BOUNDED_OUT_OF_RANGE (-100)

/* The memory a bounded run moves data in, by address (the host's, or a device's); each
 * returns 0 or an error code. */
typedef struct {
    int (*copy)(void *user, uintptr_t dst, uintptr_t src, size_t bytes); /* within it */
    int (*put)(void *user, uintptr_t dst, const void *src, size_t bytes); /* from the host */
    int (*get)(void *user, void *dst, uintptr_t src, size_t bytes); /* to the host, after run */
    int (*run)(void *user, const uintptr_t *inputs, const uintptr_t *outputs); /* the model */
} aotc_bounded_memory;

/* aotc_run_bounded in any memory: the padded buffers and extents laid out from `padded`
 * (aotc_bounded_padded_bytes of it) instead of after a scratch; returns 0,
 * AOTC_BOUNDED_OUT_OF_RANGE, or the first nonzero code of `mem`'s functions. */
int aotc_bounded_run(const aotc_bounded_memory *mem, void *user, uintptr_t padded,
                     int n_inputs, const aotc_bounded_tensor *inputs_desc,
                     const uintptr_t *inputs, const int64_t *input_dims, int n_outputs,
                     const aotc_bounded_tensor *outputs_desc, const uintptr_t *outputs,
                     int64_t *output_dims, int has_output_dims);

#ifdef __cplusplus
}
#endif

#endif /* AOTC_BOUNDED_H_ */
