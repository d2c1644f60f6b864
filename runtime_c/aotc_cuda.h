/*
 * aotc_cuda.h: the runtime of models compiled for CUDA (aotc compile --target cuda:sm_XX).
 *
 * It opens the NVIDIA driver (libcuda.so.1) at run time with dlopen, so programs link
 * without the CUDA SDK (cc app.c libNAME.a -lm -lpthread -ldl) and a machine without the
 * driver gets an error code and a message, not a crash.  The driver API types it uses
 * are declared here, compatible with cuda.h's: an aotc_cuda_ptr is a CUdeviceptr, an
 * aotc_cuda_stream a CUstream (or cudaStream_t); both pass between this API and the CUDA
 * driver or runtime API unchanged.
 *
 * The generated NAME.h includes this header.  Besides the functions the generated
 * launchers call, it offers the few a C program needs to run a model without the SDK:
 * device memory, copies and synchronization, on the context that NAME_cuda_init made
 * current on the calling thread (the device's primary context, the one the CUDA runtime
 * API uses too).
 */
#ifndef AOTC_CUDA_H_
#define AOTC_CUDA_H_

#include <stddef.h>

#include "aotc_bounded.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long long aotc_cuda_ptr; /* CUdeviceptr: a device address */
typedef struct CUstream_st *aotc_cuda_stream; /* CUstream; NULL is the default stream */

/*
 * Return codes: 0 for success, a CUresult of the driver (> 0, e.g. 100 = no device), or
 * one of these.
 */
#define AOTC_CUDA_ERROR_NO_DRIVER (-1) /* libcuda.so.1 missing, or too old */
#define AOTC_CUDA_ERROR_NO_IMAGE (-2) /* no cubin or PTX in the model runs on the device */
#define AOTC_CUDA_ERROR_INVALID (-3) /* a NULL context, or one whose init failed */
#define AOTC_CUDA_ERROR_EXTENT (-4) /* a bounded run's extent outside its range */

/* The state of one model loaded on a device (part of each NAME_cuda_ctx). */
typedef struct aotc_cuda_model {
    void *context; /* CUcontext: the device's primary context, retained */
    void *module; /* CUmodule holding the kernels */
    aotc_cuda_ptr arena; /* device memory for intermediates */
    aotc_cuda_ptr weights; /* the model's constants, uploaded once */
    int device;
    int ready; /* init succeeded and destroy has not run */
    char image[32]; /* what was loaded: "sm_90 cubin", "PTX for sm_90 (JIT)" */
    char error[512]; /* the last error, with the driver's message; "" if none */
} aotc_cuda_model;

/* One embedded cubin: the architecture it was assembled for (sm_XY -> 10*X + Y). */
typedef struct aotc_cuda_image {
    int arch;
    int exact; /* sm_XYa: runs on that architecture only */
    const unsigned char *data;
} aotc_cuda_image;

/* ---- used by the generated launchers ---- */

/* Opens the driver, picks the cubin for the device's compute capability (else JITs the
 * PTX), uploads the weights and allocates the arena.  `model` names it in messages. */
int aotc_cuda_load(aotc_cuda_model *m, const char *model, int device,
                   const aotc_cuda_image *cubins, int count, int ptx_arch, const char *ptx,
                   const void *weights, size_t weight_bytes, size_t arena_bytes);
/* Looks up the kernels by name. */
int aotc_cuda_functions(aotc_cuda_model *m, const char *const *names, int count,
                        void **functions);
/* Makes the model's context current on the calling thread. */
int aotc_cuda_enter(aotc_cuda_model *m);
/* Launches one kernel on a 1-D grid; `what` names it in messages. */
int aotc_cuda_launch(aotc_cuda_model *m, void *function, unsigned grid, unsigned block,
                     aotc_cuda_stream stream, void **params, const char *what);
/* An asynchronous device-to-device copy on the stream. */
int aotc_cuda_copy(aotc_cuda_model *m, aotc_cuda_ptr dst, aotc_cuda_ptr src, size_t bytes,
                   aotc_cuda_stream stream);
/* Frees what load allocated; keeps `error`.  Safe after a failed load, and twice. */
void aotc_cuda_unload(aotc_cuda_model *m);

/* NAME_cuda_run_generic: (its context, inputs, outputs, stream) -> status. */
typedef int (*aotc_cuda_run_fn)(void *ctx, const aotc_cuda_ptr *inputs,
                                const aotc_cuda_ptr *outputs, aotc_cuda_stream stream);
/* A model with bounded dims on compact device buffers (aotc_bounded.h's aotc_run_bounded
 * on the device): the padded buffers in `scratch`, device memory of
 * aotc_bounded_padded_bytes aligned to 64; it synchronizes `stream` to read the outputs'
 * extents.  Returns 0 or an error code (AOTC_CUDA_ERROR_EXTENT for a bad extent). */
int aotc_cuda_run_bounded(aotc_cuda_model *m, aotc_cuda_run_fn run, void *ctx,
                          aotc_cuda_ptr scratch, int n_inputs,
                          const aotc_bounded_tensor *inputs_desc, const aotc_cuda_ptr *inputs,
                          const int64_t *input_dims, int n_outputs,
                          const aotc_bounded_tensor *outputs_desc, const aotc_cuda_ptr *outputs,
                          int64_t *output_dims, int has_output_dims, aotc_cuda_stream stream);

/* ---- for programs without the CUDA SDK (after a NAME_cuda_init on this thread) ---- */

int aotc_cuda_malloc(aotc_cuda_ptr *ptr, size_t bytes);
int aotc_cuda_free(aotc_cuda_ptr ptr);
int aotc_cuda_upload(aotc_cuda_ptr dst, const void *src, size_t bytes);
int aotc_cuda_download(void *dst, aotc_cuda_ptr src, size_t bytes);
int aotc_cuda_synchronize(aotc_cuda_stream stream);
/* A message for a return code of any function here (the driver's own for CUresults). */
const char *aotc_cuda_error_string(int code);

#ifdef __cplusplus
}
#endif

#endif /* AOTC_CUDA_H_ */
